import subprocess
import sys
import textwrap

import pytest

from vllm_hotfix_guard.errors import Busy
from vllm_hotfix.txn.mutex import target_mutex

HOLDER = textwrap.dedent("""
    import sys, time
    from vllm_hotfix.txn.mutex import target_mutex
    with target_mutex(sys.argv[1], timeout=5):
        print("locked", flush=True)
        sys.stdin.read()
""")


def test_second_holder_waits_once_then_busy(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        messages = []
        with pytest.raises(Busy) as info:
            with target_mutex(tmp_path, timeout=0.3, on_wait=messages.append):
                pass
        assert len(messages) == 1 and f"waiting for lock held by pid {holder.pid}" in messages[0]
        assert f"still held by pid {holder.pid}" in info.value.message
    finally:
        holder.communicate("")
    with target_mutex(tmp_path, timeout=0.3):
        assert (tmp_path / "lock").read_text().strip().isdigit()


def test_lock_of_a_killed_holder_is_free(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    holder.kill()
    holder.wait()
    with target_mutex(tmp_path, timeout=1):
        pass
