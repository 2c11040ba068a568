"""May we write this target? A real read-only bind mount over the target or the state directory, a
state directory that is a file or in another user's HOME, a disk that fills up or turns read-only at
any state-dir write: always exit 6 with the cause in one line, nothing changed, no journal left."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fixtures import crash
from fixtures.mounts import bind_read_only, read_only

PATCH = "--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -1,2 +1,2 @@\n line 1\n-line 2\n+line 2 fixed\n"
BEFORE = b"line 1\nline 2\n"
PYC = b"bytecode of the original"


@pytest.fixture
def target(tmp_path) -> Path:
    root = tmp_path / "site-packages"
    (root / "vllm" / "__pycache__").mkdir(parents=True)
    (root / "vllm" / "a.py").write_bytes(BEFORE)
    (root / "vllm" / "__pycache__" / "a.cpython-312.pyc").write_bytes(PYC)
    return root


@pytest.fixture
def patch(tmp_path) -> Path:
    path = tmp_path / "fix.patch"
    path.write_text(PATCH)
    return path


def error_lines(proc: subprocess.CompletedProcess) -> tuple[str, str]:
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("hotfix: error: ")]
    hints = [line for line in proc.stderr.splitlines() if line.startswith("hotfix: hint: ")]
    assert len(errors) == 1 and len(hints) == 1, proc.stderr
    return errors[0], hints[0]


def state_files(state: Path) -> list[str]:
    return sorted(str(p.relative_to(state)) for p in state.rglob("*") if p.is_file() and p.name != "lock")


def test_read_only_site_packages_refused_before_any_journal(run_hotfix, target, patch, _isolated_state):
    with read_only(target):
        failed = run_hotfix("apply", "--patch", patch, "--root", target)
        assert failed.returncode == 6, failed.stderr
        error, hint = error_lines(failed)
        assert "Read-only file system (EROFS); the target is not writable, nothing was changed" in error
        assert "`hotfix export ID --to DIR`" in hint and "`hotfix compose`" in hint
        assert state_files(_isolated_state) == []  # no journal, no backups/<id>/, no patch copy, no record
        assert not list(_isolated_state.rglob("backups"))
        status = run_hotfix("status", "--root", target, "--json")
        assert "interrupted" not in status.stdout
        again = run_hotfix("apply", "--patch", patch, "--root", target)
        assert again.returncode == 6 and "not writable" in again.stderr  # the same answer, not "recover first"
        recovered = run_hotfix("recover", "--root", target)
        assert recovered.returncode == 0 and recovered.stdout.startswith("nothing to recover"), recovered.stderr
        dry = run_hotfix("apply", "--patch", patch, "--root", target, "--dry-run")  # predicts the real run
        assert dry.returncode == 6 and "the target is not writable" in dry.stderr, dry.stderr
    assert (target / "vllm/a.py").read_bytes() == BEFORE


@pytest.mark.skipif(crash.STRACE is None, reason="strace is not installed")
def test_recover_a_journal_on_a_target_that_turned_read_only(run_hotfix, target, patch, tmp_path, _isolated_state):
    """kill -9 right after the journal was written; then the file system turns read-only: nothing of the
    target had changed, so `recover` succeeds (missing temps and unchanged files need no write)."""
    argv = crash.hotfix_argv("apply", "--patch", patch, "--root", target)
    found = crash.points(argv, tmp_path / "log")
    journals = []
    for syscall, n in found:
        shutil.rmtree(_isolated_state, ignore_errors=True)
        (target / "vllm/a.py").write_bytes(BEFORE)
        (target / "vllm/__pycache__/a.cpython-312.pyc").write_bytes(PYC)
        crash.run_with(argv, syscall, n, "signal=SIGKILL")
        journals = list(_isolated_state.rglob("journal.json"))
        if journals and not list(target.rglob("*.hotfix-tmp")):
            break
    assert journals, "no point between the journal and the first temp file"
    with read_only(target):
        status = run_hotfix("status", "--root", target, "--json")
        assert "interrupted" in {s["state"] for s in json.loads(status.stdout)}
        done = run_hotfix("recover", "--root", target)
        assert done.returncode == 0, done.stderr
        assert not journals[0].exists()
        assert run_hotfix("apply", "--patch", patch, "--root", target).returncode == 6
    assert (target / "vllm/a.py").read_bytes() == BEFORE
    assert (target / "vllm/__pycache__/a.cpython-312.pyc").read_bytes() == PYC


def test_read_only_state_dir(run_hotfix, target, patch, tmp_path):
    state = tmp_path / "ro-state"
    state.mkdir()
    with read_only(state):
        failed = run_hotfix("apply", "--patch", patch, "--root", target, env={"HOTFIX_STATE_DIR": str(state)})
    assert failed.returncode == 6, failed.stderr
    error, hint = error_lines(failed)
    assert f"HOTFIX_STATE_DIR {state} is not writable (Read-only file system (EROFS))" in error
    assert "set HOTFIX_STATE_DIR" in hint
    assert (target / "vllm/a.py").read_bytes() == BEFORE


def test_state_dir_is_a_file(run_hotfix, target, patch, tmp_path):
    state = tmp_path / "state-file"
    state.write_text("not a directory\n")
    dry = run_hotfix("apply", "--patch", patch, "--root", target, "--dry-run", env={"HOTFIX_STATE_DIR": str(state)})
    assert dry.returncode == 6 and "(Not a directory (ENOTDIR))" in dry.stderr, dry.stderr
    failed = run_hotfix("apply", "--patch", patch, "--root", target, env={"HOTFIX_STATE_DIR": str(state)})
    assert failed.returncode == 6, failed.stderr
    error, hint = error_lines(failed)
    assert "is not writable (Not a directory (ENOTDIR))" in error and "set HOTFIX_STATE_DIR" in hint
    assert (target / "vllm/a.py").read_bytes() == BEFORE


def test_state_dir_in_another_users_home(target, patch, tmp_path):
    """No HOTFIX_STATE_DIR: the default lies under $HOME, which belongs to another user (root without
    CAP_DAC_OVERRIDE, since this venv's interpreter is private to root)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv(1) to drop the capability that overrides file permissions")
    home = tmp_path / "someone-elses-home"
    home.mkdir(mode=0o755)
    os.chown(home, 65534, 65534)
    env = {k: v for k, v in os.environ.items() if k not in ("HOTFIX_STATE_DIR", "XDG_STATE_HOME")}
    env["HOME"] = str(home)
    drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search", "--"]
    failed = subprocess.run(drop + crash.hotfix_argv("apply", "--patch", patch, "--root", target), env=env,
                            capture_output=True, text=True)
    assert failed.returncode == 6, failed.stderr
    error, hint = error_lines(failed)
    assert f"the state directory {home}/.local/state/vllm-hotfix is not writable (Permission denied (EACCES))" in error
    assert "set HOTFIX_STATE_DIR" in hint
    assert (target / "vllm/a.py").read_bytes() == BEFORE


STATE_DIR_CALLS = ("mkdir", "mkdirat", "ftruncate", "pwrite64", "write", "rename", "renameat", "link", "linkat",
                   "unlink", "unlinkat", "fsync")


@pytest.mark.slow
@pytest.mark.skipif(crash.STRACE is None, reason="strace is not installed")
@pytest.mark.parametrize("error", ["ENOSPC", "EROFS"])
def test_state_dir_fills_up_or_turns_read_only_at_any_write(target, patch, tmp_path, _isolated_state, error):
    """Every write-side call (state-dir mkdirs, the lock's pid, backups before the journal, the record
    after it) failing: exit 0 (past the commit point) or 6 with the cause, never 70; files all-or-nothing."""
    argv = crash.hotfix_argv("apply", "--patch", patch, "--root", target)
    found = crash.points(argv, tmp_path / "log", syscalls=STATE_DIR_CALLS)
    assert {"mkdir", "pwrite64"} <= {s for s, _ in found}, found
    after = BEFORE.replace(b"line 2\n", b"line 2 fixed\n")
    for syscall, n in found:
        shutil.rmtree(_isolated_state, ignore_errors=True)
        (target / "vllm/a.py").write_bytes(BEFORE)
        failed = crash.run_with(argv, syscall, n, f"error={error}")
        now = (target / "vllm/a.py").read_bytes()
        assert failed.returncode in (0, 6), (syscall, n, failed.stderr)
        assert "Traceback" not in failed.stderr and "internal error" not in failed.stderr, (syscall, n)
        if failed.returncode == 6:
            assert f"({error})" in failed.stderr and now == BEFORE, (syscall, n, failed.stderr)
            assert not list(_isolated_state.rglob("journal.json")), (syscall, n)
            assert not list(_isolated_state.rglob("backups/*")) and not list(_isolated_state.rglob("patches/*")), (syscall, n)
        else:
            assert now == after, (syscall, n)


def test_a_file_bind_mounted_over_the_install(run_hotfix, target, patch, tmp_path, _isolated_state):
    """Seed 001's setup: one patched file bind-mounted read-only over site-packages, then someone runs
    `hotfix apply` inside: refused before any journal, with the mount named."""
    shipped = tmp_path / "shipped.py"
    shipped.write_bytes(BEFORE)
    with bind_read_only(shipped, target / "vllm" / "a.py"):
        failed = run_hotfix("apply", "--patch", patch, "--root", target)
        assert failed.returncode == 6, failed.stderr
        error, hint = error_lines(failed)
        assert "Device or resource busy (EBUSY): it is a mount point; the target is not writable" in error
        assert "`hotfix compose`" in hint
        assert state_files(_isolated_state) == []

