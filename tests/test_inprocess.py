"""The in-process runs of the CLI (tests/fixtures/inprocess.py, process_state.py): a run leaves nothing of
itself in the test's process, sees none of the test's own modules or paths, gives what the real process
gives, and leaves to a real process what only a process can show."""

from __future__ import annotations

import os
import signal
import sys
import types

import pytest

from fixtures.inprocess import needs_process, run_in_process
from fixtures.process_state import isolated


def test_a_run_puts_back_what_it_changed_in_the_process(tmp_path):
    from vllm_hotfix.flow import resolve
    from vllm_hotfix_guard.txn import fsops

    before = (dict(os.environ), os.getcwd(), signal.getsignal(signal.SIGTERM), set(resolve._warned), fsops._hold)
    umask = os.umask(0o022)
    os.umask(umask)
    with isolated(env={"HOTFIX_X": "1"}, cwd=tmp_path):
        assert os.environ["HOTFIX_X"] == "1" and os.getcwd() == str(tmp_path)
        os.environ["HOTFIX_ALLOW_SHADOW"] = "1"  # what --allow-shadow does for the command's children
        os.umask(0o077)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        resolve._warned.add("a warning said once per process")
        fsops.hold_late_signals()  # "this process is one command"
    assert (dict(os.environ), os.getcwd(), signal.getsignal(signal.SIGTERM), set(resolve._warned),
            fsops._hold) == before
    assert os.umask(umask) == umask


def test_a_module_the_test_made_is_not_seen_by_the_command_and_is_back_after(tmp_path):
    fake = types.ModuleType("vllm")
    fake.__file__ = str(tmp_path / "vllm" / "__init__.py")
    sys.modules["vllm"] = fake
    try:
        with isolated(env=None, cwd=tmp_path):
            assert "vllm" not in sys.modules and str(tmp_path) == sys.path[0]
            assert not any("tests" == os.path.basename(p) for p in sys.path)  # a new interpreter's sys.path
        assert sys.modules["vllm"] is fake
    finally:
        del sys.modules["vllm"]


def test_a_blocked_signal_left_behind_fails_the_run_and_is_unblocked():
    with pytest.raises(AssertionError, match="left the signal mask changed"):
        with isolated(env=None, cwd=None):
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    assert signal.SIGUSR1 not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


@pytest.mark.parametrize("args", [["list", "--json"], ["show", "no-such-fix"], ["status", "--nope"], ["--version"]])
def test_in_process_gives_what_the_process_gives(run_hotfix, args):
    inside, process = run_in_process(args), run_hotfix(*args, process=True)
    assert (inside.returncode, inside.stdout, inside.stderr) == (process.returncode, process.stdout, process.stderr)


def test_settings_read_as_an_interpreter_starts_need_a_process():
    assert not needs_process({"HOTFIX_CATALOG": "/x", **{k: v for k, v in os.environ.items() if k.startswith("PYTHON")}})
    assert needs_process({"PYTHONPATH": "/x"}) and needs_process({"LC_ALL": "C", "PYTHONUTF8": "0"})
