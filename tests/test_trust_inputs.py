"""Reads that must not follow a link out, nor print what lies behind it, nor let a name forge a line (issue 21)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from fixtures.manifests import write_patch_catalog
from vllm_hotfix_guard import plugin as guard, wording
from vllm_hotfix_guard.core.verdict import FileCheck

SECRET = b"root:$6$not-for-anyone's-eyes:19000:0:99999:7:::\n"


@pytest.mark.real
@pytest.mark.slow
def test_audit_names_a_symlink_in_the_install_and_never_hashes_what_it_points_to(vllm_install, run_hotfix, tmp_path):
    venv = vllm_install("0.30.0")
    secret = tmp_path / "shadow"
    secret.write_bytes(SECRET)
    planted = venv.site_packages / "vllm" / "envs.py"
    planted.unlink()
    planted.symlink_to(secret)
    done = run_hotfix("audit", "vllm", "--python", venv.python, "--json")
    assert done.returncode == 1, done.stderr
    (difference,) = [d for d in json.loads(done.stdout)["differences"] if d["path"] == "vllm/envs.py"]
    assert difference["kind"] == "symlink" and difference["actual"] is None
    digest = hashlib.sha256(SECRET).hexdigest()
    assert digest not in done.stdout + done.stderr


def test_a_catalog_patch_that_is_a_symlink_is_refused_without_its_hash(tmp_path, run_hotfix):
    secret = tmp_path / "shadow"
    secret.write_bytes(SECRET)
    catalog = write_patch_catalog(tmp_path / "catalog", "linked", b"not the patch\n", distribution="vllm",
                                  versions=">=0.30.0", fixed_in="0.32.0", title="A linked patch")
    patch = catalog / "patches" / "linked" / "fix.patch"
    patch.unlink()
    patch.symlink_to(secret)
    tree = tmp_path / "root"
    (tree / "vllm").mkdir(parents=True)
    (tree / "vllm" / "__init__.py").write_text("")
    (tree / "pyproject.toml").write_text('[project]\nname = "vllm"\nversion = "0.30.0"\n')  # a checkout's version
    done = run_hotfix("apply", "linked", "--root", tree, "--catalog", catalog)
    assert done.returncode == 8, done.stderr
    assert "is a symbolic link" in done.stderr and hashlib.sha256(SECRET).hexdigest() not in done.stderr


def test_a_name_from_a_record_or_lock_cannot_forge_a_guard_line():
    where = "/site-packages/vllm/x.py\nINFO 12-01 00:00:00 [guard.py:1] vllm-hotfix guard pid=1 role=main: all in effect"
    check = FileCheck("vllm/x.py", "baseline", "a" * 64, "b" * 64, "a" * 64, where)
    verdict = wording.verdict_of("fix", "vllm", "lost", "every file is back", (check,), "0.30.0", "require")
    line = guard.summary_line((verdict,), "hf1-none")
    assert "\n" not in line and "\\n" in line


def test_a_lock_path_with_a_newline_is_one_line(tmp_path):
    weird = tmp_path / "a\nERROR forged.lock"
    (verdict,) = guard.check(lock=str(weird), require=())
    assert not verdict.in_effect and "\n" not in guard.summary_line((verdict,), "hf1-none")


def test_hotfix_lock_fifo_and_device_are_refused_at_once(tmp_path):
    fifo = tmp_path / "fifo.lock"
    os.mkfifo(fifo)
    for lock in (fifo, Path("/dev/zero")):
        (verdict,) = guard.check(lock=str(lock), require=())
        assert not verdict.in_effect and "not a regular file" in verdict.detail
