"""status / verify / rollback on a real vLLM 0.30.0 wheel install, through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fixtures.twofiles import ENVS, VERSION, make_two_file_patch, snapshot  # noqa: F401

pytestmark = pytest.mark.real


def status(run_hotfix, python, *ids) -> list[dict]:
    """Entries of `status --json`; the exit code is 1 exactly when a named or recorded one is not in effect."""
    done = run_hotfix("status", *ids, "--python", python, "--json")
    entries = json.loads(done.stdout)
    problems = [e for e in entries if e["state"] not in ("applied", "fixed-upstream") and (ids or e["recorded"])]
    assert done.returncode == (1 if problems else 0), done.stderr
    return entries


def test_adhoc_patch_apply_status_verify_drift_rollback_audit_and_apply_twice(run_hotfix, vllm_install, tmp_path):
    venv = vllm_install("0.30.0")
    sp = venv.site_packages
    pristine = snapshot(sp)
    patch = make_two_file_patch(sp, tmp_path / "patch")
    adhoc = ("--patch", patch, "--python", venv.python, "--package", "vllm")

    done = run_hotfix("apply", *adhoc, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "M vllm/envs.py (1 hunk)" in done.stdout and "nothing was written" in done.stdout
    assert snapshot(sp) == pristine

    done = run_hotfix("apply", *adhoc, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["applied"] and report["id"] == "two-files" and report["source"] == "adhoc"
    assert sorted(f["path"] for f in report["files"]) == [ENVS, VERSION]
    patched = snapshot(sp)
    assert patched[ENVS].startswith(b"# hotfix: two-file test")

    (entry,) = [s for s in status(run_hotfix, venv.python) if s["id"] == "two-files"]
    assert entry["state"] == "applied" and {f["state"] for f in entry["files"]} == {"patched"}
    assert run_hotfix("verify", "--python", venv.python).returncode == 0

    again = run_hotfix("apply", *adhoc)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("already applied: two-files")
    assert snapshot(sp) == patched

    with open(sp / VERSION, "ab") as fh:
        fh.write(b"# edited by hand\n")
    (entry,) = status(run_hotfix, venv.python, "two-files")
    assert entry["state"] == "drifted" and VERSION in entry["detail"]
    done = run_hotfix("verify", "--python", venv.python)
    assert done.returncode == 1
    assert "NOT IN EFFECT: two-files is drifted: vllm/version.py (neither baseline nor patched)" in done.stdout
    refused = run_hotfix("rollback", "two-files", "--python", venv.python)
    assert refused.returncode == 3 and "neither what two-files wrote nor the baseline" in refused.stderr

    (sp / VERSION).write_bytes(patched[VERSION])
    done = run_hotfix("rollback", "two-files", "--python", venv.python)
    assert done.returncode == 0, done.stderr
    assert "from the recorded backups" in done.stdout
    assert snapshot(sp) == pristine
    audit = run_hotfix("audit", "vllm", "--python", venv.python)
    assert audit.returncode == 0, audit.stdout
    assert not [s for s in status(run_hotfix, venv.python) if s["id"] == "two-files"]


def test_rollback_without_backups_reverse_applies_the_recorded_patch(run_hotfix, vllm_install, tmp_path, _isolated_state):
    venv = vllm_install("0.30.0")
    pristine = snapshot(venv.site_packages)
    patch = make_two_file_patch(venv.site_packages, tmp_path / "patch")
    done = run_hotfix("apply", "--patch", patch, "--python", venv.python, "--package", "vllm", "--id", "mine")
    assert done.returncode == 0, done.stderr
    for backups in _isolated_state.glob("targets/*/backups/mine"):
        for file in backups.rglob("*.py"):
            file.unlink()
    done = run_hotfix("rollback", "mine", "--python", venv.python)
    assert done.returncode == 0, done.stderr
    assert "by reverse-applying the recorded patch" in done.stdout
    assert snapshot(venv.site_packages) == pristine


def test_reinstalling_the_wheel_over_a_patched_install_is_lost(run_hotfix, vllm_install, vllm_wheel):
    venv = vllm_install("0.30.0")
    done = run_hotfix("apply", "mamba-align-block-size", "--python", venv.python)
    assert done.returncode == 0, done.stderr
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv.python), "install", "--force-reinstall",
                    "--no-deps", "--no-compile", "--disable-pip-version-check", "-q", str(vllm_wheel("0.30.0"))],
                   check=True)
    (entry,) = status(run_hotfix, venv.python, "mamba-align-block-size")
    assert entry["state"] == "lost" and entry["recorded"] is True
    done = run_hotfix("verify", "--python", venv.python)
    assert done.returncode == 1
    assert f"re-run `hotfix apply mamba-align-block-size --python {venv.python}`" in done.stdout
    done = run_hotfix("apply", "mamba-align-block-size", "--python", venv.python)
    assert done.returncode == 0, done.stderr
    assert run_hotfix("verify", "mamba-align-block-size", "--python", venv.python).returncode == 0


def test_status_without_a_record_is_decided_from_the_files(run_hotfix, vllm_install):
    venv = vllm_install("0.30.0")
    (entry,) = [s for s in status(run_hotfix, venv.python) if s["id"] == "mamba-align-block-size"]
    assert entry["state"] == "not-applied" and entry["recorded"] is False
    done = run_hotfix("verify", "mamba-align-block-size", "--python", venv.python)
    assert done.returncode == 1 and "is not-applied" in done.stdout
    nothing = run_hotfix("verify", "--python", venv.python)
    assert nothing.returncode == 1 and "nothing to verify" in nothing.stderr
    unknown = run_hotfix("status", "mamba-align-blocksize", "--python", venv.python)
    assert unknown.returncode == 3 and "did you mean 'mamba-align-block-size'" in unknown.stderr
