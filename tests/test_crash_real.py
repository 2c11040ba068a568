"""Crash safety of `hotfix apply` on a real vLLM 0.30.0 install, with faults injected by strace.

For every write, rename, link, unlink and fsync an apply makes (an ad-hoc two-file patch, and the
catalog hotfix mamba-align-block-size): SIGKILL at that call, then

- `status` says `interrupted` exactly while a journal is pending (and `verify` exits 1);
- after `hotfix recover --python`, every file is byte-identical to before the apply or to after a
  complete apply, never in between, and status / verify / rollback agree with the files: before ->
  nothing recorded (the hotfix is not-applied), after -> recorded and applied, rollback restores.

ENOSPC / EROFS at every write / rename: exit 6 and nothing changed, or (past the commit point) the
apply is complete and recorded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from fixtures import crash
from fixtures.twofiles import make_two_file_patch, snapshot

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.skipif(crash.STRACE is None, reason="strace not installed")]

MAMBA = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"


def files(sp, paths) -> dict[str, bytes]:
    return {p: (sp / p).read_bytes() for p in paths}


@pytest.fixture(params=["adhoc", "catalog"])
def case(request, vllm_install, tmp_path, _isolated_state, run_hotfix):
    venv = vllm_install("0.30.0")
    sp = venv.site_packages
    if request.param == "adhoc":
        patch = make_two_file_patch(sp, tmp_path / "patch")
        args = ("--patch", patch, "--python", venv.python, "--package", "vllm")
        hotfix_id, paths = "two-files", list(snapshot(sp))
    else:
        args = ("mamba-align-block-size", "--python", venv.python)
        hotfix_id, paths = "mamba-align-block-size", [MAMBA]
    before = files(sp, paths)
    assert run_hotfix("apply", *args).returncode == 0
    after = files(sp, paths)
    assert run_hotfix("rollback", hotfix_id, "--python", venv.python).returncode == 0
    assert files(sp, paths) == before
    shutil.rmtree(_isolated_state / "targets", ignore_errors=True)
    return venv, args, hotfix_id, paths, before, after


def reset(venv, before: dict[str, bytes], state_dir) -> None:
    for rel, data in before.items():
        (venv.site_packages / rel).write_bytes(data)
    shutil.rmtree(state_dir / "targets", ignore_errors=True)


def state_of(run_hotfix, hotfix_id, python) -> tuple[str, bool]:
    done = run_hotfix("status", "--python", python, "--json")  # every recorded + every catalog hotfix
    assert done.returncode in (0, 1), done.stderr
    entries = json.loads(done.stdout)
    entry = next((e for e in entries if e["id"] == hotfix_id), None) or \
        next((e for e in entries if e["id"] == "(unrecorded apply)"), None)
    if entry is None:
        return "none", False
    return entry["state"], entry["recorded"]


def leftovers(venv) -> list:
    return list((venv.site_packages / "vllm").rglob(".*.hotfix-tmp"))


def test_sigkill_at_every_call_then_status_recover_rollback_agree(case, tmp_path, _isolated_state, run_hotfix):
    venv, args, hotfix_id, paths, before, after = case
    argv = crash.hotfix_argv("apply", *args)
    points = crash.points(argv, tmp_path / "trace.log")
    reset(venv, before, _isolated_state)
    assert len(points) >= 20, points
    seen = set()
    for syscall, n in points:
        killed = crash.run_with(argv, syscall, n, "signal=SIGKILL")
        if killed.returncode == 0:  # this run made fewer such calls than the traced one
            reset(venv, before, _isolated_state)
            continue
        state, _ = state_of(run_hotfix, hotfix_id, venv.python)
        pending = any((d / "journal" / "journal.json").exists() for d in (_isolated_state / "targets").glob("*"))
        assert (state == "interrupted") == pending, (syscall, n, state)
        if pending:
            assert run_hotfix("verify", "--python", venv.python).returncode == 1
        done = run_hotfix("recover", "--python", venv.python)
        assert done.returncode == 0, (syscall, n, done.stderr)
        now = files(venv.site_packages, paths)
        assert now in (before, after), f"{syscall} #{n}: files are between before and after"
        assert leftovers(venv) == []
        state, recorded = state_of(run_hotfix, hotfix_id, venv.python)
        if now == before:
            assert not recorded and state in ("not-applied", "none"), (syscall, n, state)
            assert run_hotfix("verify", "--python", venv.python).returncode == 1  # nothing recorded to verify
        else:
            assert recorded and state == "applied", (syscall, n, state)
            assert run_hotfix("verify", "--python", venv.python).returncode == 0
            back = run_hotfix("rollback", hotfix_id, "--python", venv.python)
            assert back.returncode == 0 and files(venv.site_packages, paths) == before, (syscall, n, back.stderr)
        seen.add("after" if now == after else "before")
        reset(venv, before, _isolated_state)
    assert seen == {"before", "after"}


@pytest.mark.parametrize("syscall,error", [("write", "ENOSPC"), ("rename", "EROFS")])
def test_write_errors_exit_6_and_change_nothing(case, tmp_path, _isolated_state, run_hotfix, syscall, error):
    venv, args, hotfix_id, paths, before, after = case
    argv = crash.hotfix_argv("apply", *args)
    points = [p for p in crash.points(argv, tmp_path / "trace.log", (syscall,)) if p[0] == syscall]
    reset(venv, before, _isolated_state)
    for _, n in points:
        done = crash.run_with(argv, syscall, n, f"error={error}")
        now = files(venv.site_packages, paths)
        assert leftovers(venv) == []
        state, recorded = state_of(run_hotfix, hotfix_id, venv.python)
        if done.returncode == 2 and n == 1:
            # strace counts per task: the probe process's only write (its answer on a pipe) fails too
            assert now == before and not recorded and "Traceback" not in done.stderr, done.stderr
        elif done.returncode != 0:
            assert done.returncode == 6, (syscall, n, done.stderr)
            assert "nothing was changed" in done.stderr and "internal error" not in done.stderr, done.stderr
            assert now == before and not recorded, f"{syscall} #{n} failed but files or record changed"
        else:  # past the commit point: complete and recorded
            assert now == after and recorded and state == "applied", (syscall, n)
        reset(venv, before, _isolated_state)
    done = subprocess.run(["strace", "-f", "-qq", "-o", "/dev/null", "-e", f"inject={syscall}:error={error}", *argv],
                          capture_output=True, text=True, env=crash.env())
    assert done.returncode != 0 and files(venv.site_packages, paths) == before
    assert os.environ["HOTFIX_STATE_DIR"]  # the isolated state dir, never the user's
