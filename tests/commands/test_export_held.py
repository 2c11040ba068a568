"""`hotfix export` where the installed file already holds the fix (issue 45): the patched file of an earlier export
bind-mounted over site-packages (compose's mount, seen from the host), or the file replaced by its patched bytes
with no record. Export judges the file by core/presence.presence, the rule `status` judges it by, and exports
the bytes as they are (their baseline, the patch reversed, proven against RECORD); bytes that are neither
are refused with the mount named and a remedy that works. On a real vLLM 0.30.0 install."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil

import pytest

pytestmark = [pytest.mark.real, pytest.mark.slow]

HOTFIX = "mamba-align-block-size"
PATH = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"


def snapshot(directory) -> dict:
    """Every file below ``directory``: size, mtime and mode (what any write would change)."""
    found = {}
    for top, _, names in os.walk(directory):
        for name in names:
            info = os.lstat(os.path.join(top, name))
            found[os.path.join(top, name)] = (info.st_size, info.st_mtime_ns, info.st_mode)
    return found


def record_sha256(venv, path: str) -> str:
    (dist_info,) = venv.site_packages.glob("vllm-*.dist-info")
    for line in (dist_info / "RECORD").read_text().splitlines():
        name, digest, _ = line.rsplit(",", 2)
        if name == path:
            import base64

            return base64.urlsafe_b64decode(digest.split("=", 1)[1] + "==").hex()
    raise AssertionError(f"{path} not in RECORD")


def without_run_fields(lock: dict) -> dict:
    return {k: v for k, v in lock.items() if k not in ("version", "generator")}


@pytest.fixture
def first_export(vllm_install, run_hotfix, tmp_path):
    venv = vllm_install("0.30.0")
    done = run_hotfix("export", HOTFIX, "--to", tmp_path / "first", "--python", venv.python)
    assert done.returncode == 0, done.stderr
    return venv, tmp_path / "first"


def test_export_while_the_patched_file_is_bind_mounted_runs_as_status_says(first_export, run_hotfix, tmp_path):
    """status's to-do (export, then compose) run as pasted while compose's mount is in place: export exits 0
    and writes the mounted bytes and the same lock; nothing in the install or the state directory changes."""
    from fixtures.mounts import bind_read_only

    venv, first = first_export
    patched = first / HOTFIX / PATH
    with bind_read_only(patched, venv.site_packages / PATH):
        status = run_hotfix("status", HOTFIX, "--python", venv.python)
        assert status.returncode == 0, status.stderr
        export_line = next(line for line in status.stdout.splitlines() if "to do:" in line).split("`")[1]
        before, state = snapshot(venv.site_packages), snapshot(os.environ["HOTFIX_STATE_DIR"])
        project = tmp_path / "project"
        project.mkdir()
        done = run_hotfix(*shlex.split(export_line)[1:], cwd=project)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "the installed file holds this change already" in done.stdout
        again = project / "hotfix-export"
        assert (again / HOTFIX / PATH).read_bytes() == patched.read_bytes() == (venv.site_packages / PATH).read_bytes()
        assert without_run_fields(json.loads((again / "hotfix.lock").read_text())) == \
            without_run_fields(json.loads((first / "hotfix.lock").read_text()))
        assert snapshot(venv.site_packages) == before and snapshot(os.environ["HOTFIX_STATE_DIR"]) == state
        assert sorted(p.name for p in again.iterdir()) == sorted(["guard", HOTFIX, "hotfix.lock"])
        # into the very directory the mount comes from: a new lock version, the same bytes
        into_first = run_hotfix("export", HOTFIX, "--to", first, "--python", venv.python)
        assert into_first.returncode == 0, into_first.stderr
        assert json.loads((first / "hotfix.lock").read_text())["version"] == 2
        assert (first / HOTFIX / PATH).read_bytes() == (again / HOTFIX / PATH).read_bytes()


def test_export_of_a_file_holding_the_patched_bytes_without_a_record(first_export, run_hotfix, tmp_path):
    """The file replaced by its patched bytes (a hand apply, no record): the lock's baseline is RECORD's sha256,
    the exported file the bytes on disk; --json names it under "held"; the install is not touched."""
    venv, first = first_export
    shutil.copyfile(first / HOTFIX / PATH, venv.site_packages / PATH)
    before = snapshot(venv.site_packages)
    done = run_hotfix("export", HOTFIX, "--to", tmp_path / "again", "--python", venv.python, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["held"] == [PATH]
    (locked,) = report["hotfixes"][0]["files"]
    on_disk = (venv.site_packages / PATH).read_bytes()
    assert locked["sha256"] == hashlib.sha256(on_disk).hexdigest()
    assert locked["baseline_sha256"] == record_sha256(venv, PATH)
    assert (tmp_path / "again" / HOTFIX / PATH).read_bytes() == on_disk
    assert snapshot(venv.site_packages) == before
    dry = run_hotfix("export", HOTFIX, "--to", tmp_path / "dry", "--python", venv.python, "--dry-run")
    assert dry.returncode == 0 and not (tmp_path / "dry").exists()


@pytest.mark.parametrize("edit, code", [("fix-and-more", 3), ("conflict", 4)])
def test_a_mount_holding_other_bytes_is_refused_naming_it(first_export, run_hotfix, tmp_path, edit, code):
    """A mounted file that holds the fix plus an edit (its reverse is not RECORD's bytes: 3) or a vendor edit the
    patch does not apply to (4): refused, the mount named, the remedy that works; nothing written."""
    from fixtures.mounts import bind_read_only

    venv, first = first_export
    vendor = tmp_path / "vendor.py"
    pristine = (venv.site_packages / PATH).read_bytes()
    if edit == "fix-and-more":
        vendor.write_bytes((first / HOTFIX / PATH).read_bytes() + b"# vendor build 2026-11-30\n")
    else:
        vendor.write_bytes(pristine.replace(b"// self.cache_config.block_size", b"// max(1, self.cache_config.block_size)"))
    with bind_read_only(vendor, venv.site_packages / PATH):
        done = run_hotfix("export", HOTFIX, "--to", tmp_path / "out", "--python", venv.python)
    assert done.returncode == code, done.stdout + done.stderr
    assert f"{PATH} is a bind mount from {vendor}" in done.stderr
    assert "hint: remove the mount" in done.stderr and "force-reinstall" not in done.stderr
    assert not (tmp_path / "out").exists() and (venv.site_packages / PATH).read_bytes() == pristine
