"""Crash safety of `hotfix apply` on a real vLLM 0.30.0 install, with faults injected by strace.

For every N over the apply's rename(2) and write(2) calls: SIGKILL at the Nth call, then
`hotfix recover --python`: every file is byte-identical to before the apply or to after a complete
apply, never in between. ENOSPC on the Nth write / EROFS on the Nth rename: exit non-zero and
nothing changed (or, past the commit point, the apply is complete and recorded).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.twofiles import make_two_file_patch, snapshot

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed")


def traced_calls(argv: list[str], syscall: str, log: Path) -> list[str]:
    subprocess.run(["strace", "-qq", "-o", str(log), "-e", f"trace={syscall}", *argv],
                   check=True, capture_output=True)
    return [line for line in log.read_text().splitlines() if line.startswith(f"{syscall}(")]


def first_message(calls: list[str]) -> int:
    """1-based index of the first write to stdout/stderr: from there on the transaction is over."""
    return next((i for i, line in enumerate(calls, 1) if line.startswith(("write(1,", "write(2,"))), len(calls) + 1)


def hotfix(*args) -> list[str]:
    return [sys.executable, "-m", "vllm_hotfix", *map(str, args)]


@pytest.fixture
def install(vllm_install, tmp_path):
    venv = vllm_install("0.30.0")
    patch = make_two_file_patch(venv.site_packages, tmp_path / "patch")
    apply = hotfix("apply", "--patch", patch, "--python", venv.python, "--package", "vllm")
    before = snapshot(venv.site_packages)
    subprocess.run(apply, check=True, capture_output=True)
    after = snapshot(venv.site_packages)
    subprocess.run(hotfix("rollback", "two-files", "--python", venv.python), check=True, capture_output=True)
    assert snapshot(venv.site_packages) == before
    return venv, apply, before, after


def reset(venv, before: dict[str, bytes], state_dir: Path) -> None:
    for rel, data in before.items():
        (venv.site_packages / rel).write_bytes(data)
    shutil.rmtree(state_dir / "targets", ignore_errors=True)


def leftovers(venv) -> list[Path]:
    return list((venv.site_packages / "vllm").glob(".*.hotfix-tmp"))


def recorded(state_dir: Path) -> bool:
    return any("two-files" in json.loads(p.read_text())["hotfixes"] for p in state_dir.glob("targets/*/state.json"))


@pytest.mark.parametrize("syscall", ["rename", "write"])
def test_sigkill_at_every_call_then_recover_gives_before_or_after(install, tmp_path, _isolated_state, syscall):
    venv, apply, before, after = install
    total = len(traced_calls(apply, syscall, tmp_path / "count.log"))
    reset(venv, before, _isolated_state)
    assert total >= (7 if syscall == "rename" else 6)
    outcomes = []
    for n in range(1, total + 1):
        subprocess.run(["strace", "-qq", "-o", "/dev/null", "-e", f"trace={syscall}",
                        "-e", f"inject={syscall}:signal=SIGKILL:when={n}", *apply], capture_output=True)
        done = subprocess.run(hotfix("recover", "--python", venv.python), capture_output=True, text=True)
        assert done.returncode == 0, (n, done.stderr)
        now = snapshot(venv.site_packages)
        assert now in (before, after), f"{syscall} #{n}: files are between before and after"
        assert leftovers(venv) == []
        outcomes.append("after" if now == after else "before")
        if now == after:  # past the commit point: the next apply completes the record
            healed = subprocess.run(apply, capture_output=True, text=True)
            assert healed.returncode == 0 and healed.stdout.startswith("already applied"), healed.stderr
            assert recorded(_isolated_state)
        reset(venv, before, _isolated_state)
    assert "before" in outcomes


@pytest.mark.parametrize("syscall,error", [("write", "ENOSPC"), ("rename", "EROFS")])
def test_write_errors_exit_non_zero_and_change_nothing(install, tmp_path, _isolated_state, syscall, error):
    venv, apply, before, after = install
    calls = traced_calls(apply, syscall, tmp_path / "count.log")
    reset(venv, before, _isolated_state)
    reporting = first_message(calls)
    for n in range(1, len(calls) + 1):
        done = subprocess.run(["strace", "-qq", "-o", "/dev/null", "-e", f"trace={syscall}",
                               "-e", f"inject={syscall}:error={error}:when={n}", *apply],
                              capture_output=True, text=True)
        now = snapshot(venv.site_packages)
        assert leftovers(venv) == []
        if n >= reporting:  # the apply is complete and recorded; only printing the report failed
            assert now == after and recorded(_isolated_state), f"{syscall} #{n}"
        elif done.returncode != 0:
            assert now == before, f"{syscall} #{n} failed with {done.returncode} but files changed: {done.stderr}"
            assert not recorded(_isolated_state)
        else:
            assert now == after and recorded(_isolated_state), f"{syscall} #{n}"
        reset(venv, before, _isolated_state)
    done = subprocess.run(["strace", "-qq", "-o", "/dev/null", "-e", f"trace={syscall}",
                           "-e", f"inject={syscall}:error={error}", *apply], capture_output=True, text=True)
    assert done.returncode != 0 and snapshot(venv.site_packages) == before
