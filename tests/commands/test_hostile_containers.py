"""Issue 12 on a real vLLM 0.30.0 install standing in for a production container's site-packages:
read-only site-packages (a real read-only bind mount), a fail-closed lock and guard, the truth about an
interrupted apply, export from a host where the hotfix is applied, idempotent rollback, no leftovers."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import crash
from fixtures.mounts import read_only

pytestmark = pytest.mark.real

HOTFIX = "mamba-align-block-size"
PATH = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
SRC = Path(__file__).resolve().parents[2] / "src"


def one_error(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("hotfix: error: ")]
    return line


def test_read_only_site_packages(vllm_install, run_hotfix, tmp_path, _isolated_state):
    """The production case: apply says so in one line and points to export + compose; nothing is left in
    the state dir; export (which only reads the install) works from the read-only mount."""
    venv = vllm_install("0.30.0")
    pristine = (venv.site_packages / PATH).read_bytes()
    with read_only(venv.site_packages):
        failed = run_hotfix("apply", HOTFIX, "--python", venv.python)
        assert failed.returncode == 6, failed.stderr
        assert "Read-only file system (EROFS); the target is not writable, nothing was changed" in one_error(failed)
        assert "`hotfix export ID --to DIR`" in failed.stderr and "`hotfix compose`" in failed.stderr
        assert not list(_isolated_state.rglob("journal.json")) and not list(_isolated_state.rglob("backups/*"))
        assert not list(_isolated_state.rglob("state.json"))
        dry = run_hotfix("apply", HOTFIX, "--python", venv.python, "--dry-run")  # predicts the real run
        assert dry.returncode == 6 and "the target is not writable" in one_error(dry)
        assert run_hotfix("recover", "--python", venv.python).returncode == 0
        status = json.loads(run_hotfix("status", HOTFIX, "--python", venv.python, "--json").stdout)
        assert [s["state"] for s in status] == ["not-applied"]
        exported = run_hotfix("export", HOTFIX, "--to", tmp_path / "export", "--python", venv.python)
        assert exported.returncode == 0, exported.stderr
    assert (venv.site_packages / PATH).read_bytes() == pristine
    lock = run_hotfix("verify", "--lock", tmp_path / "export" / "hotfix.lock", "--python", venv.python)
    assert lock.returncode == 1 and "is lost" in lock.stdout  # the bind mount is not in place yet


def test_empty_lock_fails_closed(vllm_install, run_hotfix, tmp_path):
    venv = vllm_install("0.30.0")
    assert run_hotfix("export", HOTFIX, "--to", tmp_path / "export", "--python", venv.python).returncode == 0
    lock = json.loads((tmp_path / "export" / "hotfix.lock").read_text())
    lock["hotfixes"] = []
    empty = tmp_path / "empty.lock"
    empty.write_text(json.dumps(lock))
    verified = run_hotfix("verify", "--lock", empty, "--python", venv.python)
    assert verified.returncode == 8 and "the lock names no hotfix" in one_error(verified), verified.stderr
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from vllm_hotfix_guard import plugin as guard; guard.register()")
    env = {**os.environ, "HOTFIX_LOCK": str(empty), "HOTFIX_STRICT": "1"}
    guarded = subprocess.run([sys.executable, "-c", code, str(SRC)], env=env, capture_output=True, text=True)
    assert guarded.returncode != 0 and "HotfixNotInEffect" in guarded.stderr, guarded.stderr
    assert "the lock names no hotfix" in guarded.stderr


@pytest.mark.skipif(crash.STRACE is None, reason="strace is not installed")
def test_status_and_verify_tell_of_an_interrupted_apply(vllm_install, run_hotfix, tmp_path):
    venv = vllm_install("0.30.0")
    argv = crash.hotfix_argv("apply", HOTFIX, "--python", venv.python)
    target = str((venv.site_packages / PATH).resolve())
    log = tmp_path / "trace.log"
    subprocess.run([crash.STRACE, "-f", "-qq", "-o", str(log), "-e", "trace=rename", *argv], check=True,
                   env=crash.env(), capture_output=True)
    renames = [line for line in log.read_text().splitlines() if "rename(" in line]
    at = next(i for i, line in enumerate(renames, 1) if line.rstrip().split(", ")[-1].startswith(f'"{target}")'))
    assert run_hotfix("rollback", HOTFIX, "--python", venv.python).returncode == 0
    killed = crash.run_with(argv, "rename", at + 1, "signal=SIGKILL")
    assert killed.returncode != 0
    status = run_hotfix("status", "--python", venv.python)
    assert status.returncode == 1 and "interrupted" in status.stdout, status.stdout
    assert f"hotfix recover --python {venv.python}" in status.stdout
    verified = run_hotfix("verify", "--python", venv.python)
    assert verified.returncode == 1 and "interrupted" in verified.stdout and "hotfix recover" in verified.stdout
    assert run_hotfix("recover", "--python", venv.python).returncode == 0
    assert run_hotfix("verify", "--python", venv.python).returncode in (0, 1)
    assert "interrupted" not in run_hotfix("status", "--python", venv.python).stdout


def test_export_from_a_host_where_the_hotfix_is_applied(vllm_install, run_hotfix, tmp_path):
    venv = vllm_install("0.30.0")
    pristine = (venv.site_packages / PATH).read_bytes()
    assert run_hotfix("apply", HOTFIX, "--python", venv.python).returncode == 0
    patched = (venv.site_packages / PATH).read_bytes()
    dry = run_hotfix("export", HOTFIX, "--to", tmp_path / "dry", "--python", venv.python, "--dry-run")
    assert dry.returncode == 0 and "nothing was written" in dry.stdout and not (tmp_path / "dry").exists()
    done = run_hotfix("export", HOTFIX, "--to", tmp_path / "export", "--python", venv.python)
    assert done.returncode == 0, done.stderr
    (locked,) = json.loads((tmp_path / "export" / "hotfix.lock").read_text())["hotfixes"]
    assert (tmp_path / "export" / HOTFIX / PATH).read_bytes() == patched
    assert locked["files"][0]["baseline_sha256"] == hashlib.sha256(pristine).hexdigest()
    verified = run_hotfix("verify", "--lock", tmp_path / "export" / "hotfix.lock", "--python", venv.python)
    assert verified.returncode == 0, verified.stdout
    assert run_hotfix("verify", HOTFIX, "--python", venv.python).returncode == 0  # the record is intact


def test_rollback_is_idempotent(vllm_install, run_hotfix):
    venv = vllm_install("0.30.0")
    never = run_hotfix("rollback", HOTFIX, "--python", venv.python)
    assert never.returncode == 0 and never.stdout.startswith("nothing to roll back"), never.stderr
    assert run_hotfix("apply", HOTFIX, "--python", venv.python).returncode == 0
    patched = (venv.site_packages / PATH).read_bytes()
    assert run_hotfix("rollback", HOTFIX, "--python", venv.python).returncode == 0
    again = run_hotfix("rollback", HOTFIX, "--python", venv.python, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["nothing_to_do"] is True
    (venv.site_packages / PATH).write_bytes(patched)  # patched by hand: nothing recorded to roll back from
    by_hand = run_hotfix("rollback", HOTFIX, "--python", venv.python)
    assert by_hand.returncode == 3 and "not recorded as applied" in one_error(by_hand), by_hand.stderr
    assert f"hotfix apply {HOTFIX} --python {venv.python}" in by_hand.stderr  # status's own advice, runnable
    assert (venv.site_packages / PATH).read_bytes() == patched
    unknown = run_hotfix("rollback", "no-such-fix", "--python", venv.python)  # neither recorded nor in the catalog
    assert unknown.returncode == 3 and "hint: `hotfix status --all` shows what is applied where" in unknown.stderr
    assert run_hotfix("status", "--all").returncode in (0, 1)  # the hint, as pasted, runs
